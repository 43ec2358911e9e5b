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
    assert!(value("kubefold_commit_seconds_count") > 0.0);
    assert!(value("kubefold_commit_seconds_bucket") > 0.0, "commit latency is a histogram");
    assert!(value("kubefold_commit_batch_events_count") > 0.0);
    assert!(value("kubefold_requests_total{verb=\"list\"") >= 1.0, "{text}");
    assert!(value("kubefold_requests_total{verb=\"get\"") >= 1.0);
    assert!(value("kubefold_requests_total{verb=\"watch\"") >= 1.0);
    assert!(value("kubefold_request_seconds_count") > 0.0);
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
