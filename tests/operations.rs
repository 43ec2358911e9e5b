//! Operating kubefold: clusters added and removed through the admin API
//! while a kubectl watch runs, and the metrics an operator scrapes.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

#[test]
fn a_cluster_added_and_removed_at_runtime_shows_in_a_running_watch() {
    let members = demo_members(3, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();

    let mut watch = Command::new("timeout")
        .args(["90", "kubectl", "--server", &kf.url, "get", "pods", "-A", "-w", "--no-headers", "--output-watch-events"])
        .env("KUBECONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx.recv_timeout(Duration::from_secs(30)).expect("the watch prints the current pods");

    let fourth = demo_members(1, 0.0);
    let url = fourth[0].1.url();
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/admin/v1/clusters", kf.url))
        .json(&json!({"name": "member4", "url": url}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201, "{}", resp.text().unwrap());
    let expected = kf_count(&kf, &url);
    let mut added = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while added < expected {
        let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("member4's pods in the running watch");
        if line.contains("_member4") && line.starts_with("ADDED") {
            added += 1;
        }
    }
    assert!(watch.try_wait().unwrap().is_none(), "the watch was not closed");

    let resp = reqwest::blocking::Client::new().delete(format!("{}/admin/v1/clusters/member4", kf.url)).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut deleted = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while deleted < expected {
        let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("DELETED events for member4");
        if line.contains("_member4") && line.starts_with("DELETED") {
            deleted += 1;
        }
    }
    assert!(watch.try_wait().unwrap().is_none(), "the watch survived the removal too");
    let _ = watch.kill();
    let _ = watch.wait();

    // The registration persists across a restart, the removal too.
    let resp = reqwest::blocking::Client::new()
        .post(format!("{}/admin/v1/clusters", kf.url))
        .json(&json!({"name": "member5", "url": url}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    kf.stop();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    let clusters = kf.get_json("/admin/v1/clusters");
    let names: Vec<&str> = clusters["items"].as_array().unwrap().iter().map(|c| c["spec"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["member1", "member2", "member3", "member5"]);
    kf.wait_ready();
    assert!(!kf.get_json("/api/v1/pods?labelSelector=kubefold.io%2Fcluster%3Dmember5")["items"].as_array().unwrap().is_empty());
}

fn kf_count(_kf: &Kubefold, member_url: &str) -> usize {
    let (_, body) = http_get(&format!("{member_url}/api/v1/pods"));
    serde_json::from_str::<Value>(&body).unwrap()["items"].as_array().unwrap().len()
}

#[test]
fn metrics_show_the_documented_series_after_churn() {
    let members = demo_members(2, 20.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let _ = kf.get("/api/v1/pods");
    let _ = kf.get("/api/v1/namespaces/default/pods/web-0_member1");
    let _ = reqwest::blocking::get(format!("{}/api/v1/pods?watch=1&timeoutSeconds=1", kf.url)).unwrap().text();
    std::thread::sleep(Duration::from_secs(2));
    let (code, text) = kf.get("/metrics");
    assert_eq!(code, 200);
    let value = |series: &str| -> f64 {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.starts_with(series))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    };
    assert!(value("kubefold_events_ingested_total{cluster=\"member1\"") > 0.0, "ingest counted per cluster:\n{text}");
    assert!(value("kubefold_head_resource_version") > 0.0);
    assert!(value("kubefold_objects") > 0.0);
    assert!(value("kubefold_store_bytes") > 0.0);
    assert!(value("kubefold_commit_duration_seconds_count") > 0.0);
    assert!(value("kubefold_commit_duration_seconds_bucket") > 0.0, "commit latency is a histogram");
    assert!(value("kubefold_commit_batch_events_count") > 0.0);
    assert!(value("kubefold_requests_total{verb=\"list\"") >= 1.0, "{text}");
    assert!(value("kubefold_requests_total{verb=\"get\"") >= 1.0);
    assert!(value("kubefold_requests_total{verb=\"watch\"") >= 1.0);
    assert!(value("kubefold_request_duration_seconds_count") > 0.0);
    assert!(text.contains("kubefold_member_relists_total{cluster=\"member2\"}"), "{text}");
    assert!(text.contains("kubefold_watches"), "{text}");
    assert!(value("kubefold_watch_messages_total") >= 1.0, "{text}");
    assert!(value("kubefold_watch_lines_total") >= value("kubefold_watch_messages_total"), "{text}");
}

/// Logs written to a pipe (a log file, the journal) carry no terminal
/// escape sequences, and `--logging-format json` (kube-apiserver's flag)
/// writes one JSON object per line.
#[test]
fn logs_to_a_pipe_have_no_colour_codes_and_json_logs_are_one_object_a_line() {
    let members = demo_members(1, 0.0);
    for format in ["text", "json"] {
        let (_dir, data) = data_dir();
        let kf = Kubefold::serve(&data, &cluster_flags(&members), &["--logging-format", format]);
        kf.wait_ready();
        let logs = kf.logs();
        kf.stop();
        assert!(logs.lines().count() >= 2, "{format}: too few log lines to judge: {logs}");
        assert!(!logs.contains('\u{1b}'), "{format}: escape sequences in logs written to a pipe: {logs}");
        if format == "json" {
            for line in logs.lines() {
                let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
                assert!(event["level"].is_string() && event["fields"]["message"].is_string(), "no level or message: {line}");
            }
        }
    }
}

/// The series of one family in an exposition text: (labels, value) pairs.
fn samples<'a>(text: &'a str, family: &str) -> Vec<(&'a str, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (name, labels) = series.split_once('{').map(|(n, l)| (n, l.trim_end_matches('}'))).unwrap_or((series, ""));
            (name == family).then(|| (labels, value.parse().unwrap_or(f64::NAN)))
        })
        .collect()
}

/// Prometheus' instrumentation guide: export every series from the start,
/// at zero, so a dashboard or an alert can tell zero from missing; and every
/// family has its `# HELP` and `# TYPE`. Scraped before any client request.
#[test]
fn a_fresh_kubefold_exports_every_series_at_zero_with_help_and_type() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let (code, text) = kf.get("/metrics");
    assert_eq!(code, 200);
    for family in [
        "kubefold_watches",
        "kubefold_commit_failures_total",
        "kubefold_watch_slow_closed_total",
        "kubefold_compacted_events_total",
        "kubefold_head_resource_version",
        "kubefold_compacted_resource_version",
        "kubefold_store_bytes",
        "kubefold_member_errors_total",
        "kubefold_member_bad_objects_total",
        "kubefold_member_relists_total",
        "kubefold_auth_rejected_total",
        "kubefold_config_reloads_total",
        "kubefold_build_info",
        "kubefold_objects",
        "kubefold_member_synced",
        "kubefold_member_lag_seconds",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(!samples(&text, family).is_empty(), "{family} is not exported by a fresh kubefold:\n{text}");
        assert!(text.contains(&format!("# HELP {family} ")), "{family} has no HELP:\n{text}");
        assert!(text.contains(&format!("# TYPE {family} ")), "{family} has no TYPE:\n{text}");
    }
    let requests = samples(&text, "kubefold_requests_total");
    assert!(requests.iter().any(|(labels, v)| labels.contains("verb=\"list\"") && labels.contains("resource=\"v1/pods\"") && *v == 0.0), "list of pods at zero before any request:\n{text}");
    assert!(samples(&text, "kubefold_commit_failures_total").iter().all(|(_, v)| *v == 0.0));
    let objects: f64 = samples(&text, "kubefold_objects").iter().filter(|(l, _)| l.contains("cluster=\"member1\"") && l.contains("resource=\"v1/pods\"")).map(|(_, v)| v).sum();
    let pods = kf.get_json("/api/v1/pods")["items"].as_array().unwrap().len() as f64;
    assert_eq!(objects, pods, "kubefold_objects{{cluster,resource}} counts the member's pods");
    assert!(samples(&text, "kubefold_member_synced").iter().all(|(_, v)| *v == 1.0), "a ready kubefold has every type synced:\n{text}");
    assert!(samples(&text, "kubefold_member_lag_seconds").iter().all(|(_, v)| *v == 0.0), "{text}");
    assert_eq!(samples(&text, "kubefold_build_info").first().map(|(l, _)| l.contains("version=\"")), Some(true));
    let fds = samples(&text, "process_open_fds")[0].1;
    assert!(fds >= 3.0 && fds <= samples(&text, "process_max_fds")[0].1, "{text}");
    // A member that goes away shows as behind, with its lag growing.
    drop(members);
    wait_for(Duration::from_secs(30), "member1 reported not synced", || samples(&kf.get("/metrics").1, "kubefold_member_synced").iter().any(|(_, v)| *v == 0.0));
    std::thread::sleep(Duration::from_secs(2));
    let lag = samples(&kf.get("/metrics").1, "kubefold_member_lag_seconds")[0].1;
    assert!(lag >= 1.0, "lag of a member that has been unreachable for seconds: {lag}");
    kf.stop();
}

/// `kubefold status` once and `--watch`: every member with its phase,
/// synced types, objects and lag, the store's resourceVersions, in
/// kubectl's table style; a member that goes away shows as stale, behind.
#[test]
fn kubefold_status_shows_members_store_and_lag_once_and_watching() {
    let mut members = demo_members(2, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let status = |extra: &[&str]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_kubefold")).arg("status").arg("--server").arg(&kf.url).args(extra).output().unwrap();
        assert!(out.status.success(), "kubefold status: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let row = |text: &str, first: &str| -> Vec<String> {
        text.lines().find(|l| l.split_whitespace().next() == Some(first)).unwrap_or_else(|| panic!("no {first} row:\n{text}")).split_whitespace().map(String::from).collect()
    };
    let text = status(&[]);
    assert_eq!(row(&text, "MEMBER"), ["MEMBER", "PHASE", "SYNCED", "OBJECTS", "LAG", "RELISTS", "LAST-ERROR"]);
    let stats = kf.get_json("/admin/v1/stats");
    for (name, _) in &members {
        let r = row(&text, name);
        assert_eq!(r[1], "Synced", "{text}");
        let (synced, all) = r[2].split_once('/').unwrap();
        assert_eq!(synced, all, "every type synced: {text}");
        let pods = kf.get_json(&format!("/api/v1/pods?labelSelector=kubefold.io/cluster%3D{name}"))["items"].as_array().unwrap().len();
        assert!(r[3].parse::<usize>().unwrap() >= pods && pods > 0, "objects of {name} count at least its pods ({pods}): {text}");
        assert_eq!(r[4], "0s");
    }
    let store = row(&text, "HEAD-RV");
    let values = text.lines().skip_while(|l| !l.starts_with("HEAD-RV")).nth(1).unwrap().split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(store[0], "HEAD-RV");
    assert_eq!(values[0], stats["headResourceVersion"].to_string(), "{text}");

    // Watching: frames keep coming; a member that stops shows as behind.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_kubefold"))
        .args(["status", "--watch", "--interval", "0.5", "--server", &kf.url])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines().map_while(Result::ok);
    let (_, gone) = members.remove(1);
    drop(gone);
    let mut frames = 0;
    let mut stale_row = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut in_members = false;
    for line in lines.by_ref() {
        frames += usize::from(line.starts_with("Every 0.5s: kubefold status"));
        in_members = line.starts_with("MEMBER ") || (in_members && !line.is_empty());
        if in_members && line.starts_with("member2 ") && !line.contains(" Synced ") && !line.contains(" 0s ") {
            stale_row = Some(line);
            break;
        }
        assert!(Instant::now() < deadline, "member2 never showed as behind in {frames} frames");
    }
    // And the next frame comes.
    frames += usize::from(lines.any(|l| l.starts_with("Every 0.5s: kubefold status")));
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(frames >= 2, "status --watch redraws ({frames} frames)");
    let stale_row = stale_row.unwrap();
    assert!(stale_row.contains("Stale") || stale_row.contains("Connecting"), "{stale_row}");
    kf.stop();
}
