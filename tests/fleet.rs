//! kubefold over a fleet of simulated members in one process (`kubefold sim
//! --clusters N`): the members' `NAME=URL` lines as `--clusters-file`, every
//! pod of every member listed, a churned member's changes seen, the member
//! list paged, the per-cluster metric series bounded.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{config_file, data_dir, http_get, wait_for, Kubefold};
use kubefold_testdata::sim::fleet::{self, FleetConfig};
use kubefold_testdata::{SimConfig, Workload};
use serde_json::Value;

const MEMBERS: usize = 50;
const PODS: usize = 5_000;

/// Every page of a list, followed through `continue`.
fn list_all(kf: &Kubefold, path: &str, limit: usize) -> Vec<Value> {
    let mut items = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page_path = match &token {
            Some(t) => format!("{path}?limit={limit}&continue={t}"),
            None => format!("{path}?limit={limit}"),
        };
        let page = kf.get_json(&page_path);
        items.extend(page["items"].as_array().expect("items").iter().cloned());
        match page["metadata"]["continue"].as_str() {
            Some(t) if !t.is_empty() => token = Some(t.to_string()),
            _ => return items,
        }
    }
}

/// `name -> member resourceVersion` of a member's pods as kubefold serves them.
fn kubefold_pods(kf: &Kubefold, cluster: &str) -> BTreeMap<String, String> {
    let list = kf.get_json(&format!("/clusters/{cluster}/api/v1/pods"));
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap().to_string();
            let rv = p["metadata"]["annotations"]["kubefold.io/member-resource-version"].as_str().unwrap_or_default().to_string();
            (name, rv)
        })
        .collect()
}

/// `name -> resourceVersion` of a member's pods as the member serves them.
fn member_pods(url: &str) -> BTreeMap<String, String> {
    let (code, body) = http_get(&format!("{url}/api/v1/pods"));
    assert_eq!(code, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["metadata"]["name"].as_str().unwrap().to_string(), p["metadata"]["resourceVersion"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn kubefold_over_fifty_members_of_one_simulator_converges_and_stays_readable() {
    let fleet = fleet::start(FleetConfig {
        clusters: MEMBERS,
        pods: PODS,
        member: SimConfig { workload: Workload::Empty, ..SimConfig::default() },
        ..FleetConfig::default()
    })
    .expect("the fleet starts");
    let (tmp, dir) = data_dir();
    let members_file = tmp.path().join("members");
    std::fs::write(&members_file, fleet.url_lines()).unwrap();
    let (_config_dir, config) = config_file(concat!(
        "relistConcurrency: 8\n",
        "initialListConcurrency: 8\n",
        "metricsClusterSeries: 10\n",
        "resources:\n",
        "  - resourceSelectors:\n",
        "      - {apiVersion: v1, kind: Pod}\n",
        "      - {apiVersion: v1, kind: Namespace}\n",
        "      - {apiVersion: v1, kind: ConfigMap}\n",
    ));
    let kf = Kubefold::serve(&dir, &[], &["--config", &config, "--clusters-file", members_file.to_str().unwrap()]);
    wait_for(Duration::from_secs(180), "kubefold synced with 50 members", || kf.get("/readyz").0 == 200);

    // Every pod of every member, once, by its qualified name.
    wait_for(Duration::from_secs(60), "every pod listed", || list_all(&kf, "/api/v1/pods", 5_000).len() == PODS);
    let pods = list_all(&kf, "/api/v1/pods", 1_000);
    let listed: BTreeSet<String> = pods.iter().map(|p| p["metadata"]["name"].as_str().unwrap().to_string()).collect();
    let expected: BTreeSet<String> =
        (1..=MEMBERS).flat_map(|m| (0..PODS / MEMBERS).map(move |j| format!("load-{j}_member{m}"))).collect();
    assert_eq!(listed.len(), pods.len(), "no pod twice");
    assert_eq!(listed, expected);

    // One member's pods, with their original names.
    let one = kubefold_pods(&kf, "member17");
    assert_eq!(one.keys().cloned().collect::<BTreeSet<_>>(), (0..PODS / MEMBERS).map(|j| format!("load-{j}")).collect());

    // A member churns (edits, creates, deletes): kubefold follows it to the same state.
    let churning = &fleet.members()[2];
    let before = churning.resource_version();
    churning.set_churn(100.0);
    wait_for(Duration::from_secs(10), "member3 churned", || churning.resource_version() >= before + 50);
    churning.set_churn(0.0);
    let url = churning.url();
    wait_for(Duration::from_secs(30), "kubefold's view of member3 equal to member3's own", || kubefold_pods(&kf, "member3") == member_pods(&url));
    assert_ne!(member_pods(&url), kubefold_pods(&kf, "member4"), "a member's state is its own");

    // The member list pages as Kubernetes lists do.
    let mut seen = Vec::new();
    let mut path = "/admin/v1/clusters?limit=20".to_string();
    loop {
        let page = kf.get_json(&path);
        let items = page["items"].as_array().unwrap();
        assert!(items.len() <= 20, "{} items", items.len());
        seen.extend(items.iter().map(|c| c["spec"]["name"].as_str().unwrap().to_string()));
        match page["metadata"]["continue"].as_str() {
            Some(token) => path = format!("/admin/v1/clusters?limit=20&continue={token}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), MEMBERS);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), MEMBERS, "every member once");
    let (code, body) = kf.get("/admin/v1/clusters?continue=bogus");
    assert_eq!(code, 400, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["kind"], "Status");

    // At most 10 members have series of their own; the other 40 share `_other`.
    let (code, metrics) = kf.get("/metrics");
    assert_eq!(code, 200);
    let labels: BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once("cluster=\"").and_then(|(_, rest)| rest.split_once('"')).map(|(c, _)| c))
        .collect();
    assert!(labels.contains("_other"), "{labels:?}");
    assert!(labels.len() <= 11, "{} cluster labels: {labels:?}", labels.len());
    let objects: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("kubefold_objects{") && l.contains("resource=\"v1/pods\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let now = list_all(&kf, "/api/v1/pods", 5_000).len() as u64;
    assert_eq!(objects, now, "the series still count every pod");
    assert!(metrics.lines().any(|l| l.starts_with("kubefold_member_relists_waiting ")), "the waiting relists are exported");
    kf.stop();
    fleet.stop();
}

#[test]
fn the_simulator_cli_prints_and_writes_one_name_equals_url_line_per_member() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("members");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubefold"))
        .args(["sim", "--clusters", "3", "--pods", "30", "--workload", "empty", "--listen", "127.0.0.1:0", "--urls-file"])
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the simulator starts");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let lines: Vec<String> = stdout.lines().take(3).map(|l| l.unwrap()).collect();
    let written = std::fs::read_to_string(&file).unwrap_or_default();
    let answers: Vec<u16> = lines.iter().map(|l| http_get(&format!("{}/api/v1/namespaces/load-0/pods", l.split_once('=').unwrap().1)).0).collect();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(written.lines().collect::<Vec<_>>(), lines, "the file holds what was printed");
    for (i, line) in lines.iter().enumerate() {
        let (name, url) = line.split_once('=').unwrap();
        assert_eq!(name, format!("member{}", i + 1));
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    }
    assert_eq!(answers, [200, 200, 200]);
}

#[test]
fn a_bad_line_of_a_clusters_file_is_named_and_nothing_starts() {
    let (tmp, dir) = data_dir();
    let file = tmp.path().join("members");
    std::fs::write(&file, "member1=http://127.0.0.1:1\nNot_A_Name=http://127.0.0.1:2\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kubefold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .arg("--clusters-file")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--clusters-file") && stderr.contains("line 2"), "{stderr}");
}
