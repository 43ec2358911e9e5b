//! Storage faults of a running kubefold: its data dir on a small tmpfs that
//! fills during the initial sync of a member with many pods, and is then
//! grown. Reads go on during the fault, the health checks and the stats name
//! it, an edit answers 507 with a Status saying why, and once there is space
//! every member converges with no restart, the resourceVersion never going
//! backwards. Runs where the test may mount a tmpfs (root); skips with a
//! message otherwise.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use kubefold_testdata::{SimConfig, Workload};
use serde_json::Value;

/// Unmounts the tmpfs when dropped (after kubefold stopped).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_tmpfs(dir: &Path, size: &str) -> Option<Mounted> {
    let status = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).stderr(std::process::Stdio::null()).status();
    if status.is_ok_and(|s| s.success()) {
        Some(Mounted(dir.to_path_buf()))
    } else {
        eprintln!("skipped: cannot mount a tmpfs on {} (needs root)", dir.display());
        None
    }
}

fn list_rv(kf: &Kubefold) -> u64 {
    let list = kf.get_json("/api/v1/pods?limit=1");
    list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let response = client.post(url).json(body).send().expect("kubefold answers the edit");
    let code = response.status().as_u16();
    (code, response.json().unwrap_or(Value::Null))
}

#[test]
fn a_full_disk_heals_without_a_restart() {
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let Some(_mounted) = mount_tmpfs(&data, "12m") else { return };
    let sim = kubefold_testdata::start(SimConfig { name: "m1".into(), workload: Workload::Demo, pods: 20_000, churn_per_sec: 20.0, seed: 7, ..SimConfig::default() })
        .expect("simulator starts");
    let members = vec![("m1".to_string(), sim)];
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);

    // The sync fills the disk.
    let mut seen_rv = 0;
    wait_for(Duration::from_secs(300), "the store to report a full disk", || {
        if let Ok(rv) = std::panic::catch_unwind(|| list_rv(&kf)) {
            assert!(rv >= seen_rv, "the resourceVersion went back from {seen_rv} to {rv}");
            seen_rv = rv;
        }
        kf.get("/readyz?verbose").1.contains("[-]store: no space left on device")
    });
    let (code, readyz) = kf.get("/readyz?verbose");
    assert_eq!(code, 503, "{readyz}");
    let stats = kf.get_json("/admin/v1/stats");
    assert_eq!(stats["storeFault"]["reason"], "store: no space left on device", "{stats}");
    let metrics = kf.get("/metrics").1;
    let failures: f64 = metrics
        .lines()
        .find(|l| l.starts_with("kubefold_commit_failures_total{cause=\"no-space\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("failed commits are counted by cause");
    assert!(failures > 0.0, "{}", kf.logs());
    assert!(kf.logs().contains("free space on the data dir's filesystem"), "an ERROR line says what to do");

    // Reads go on from memory, with what was committed.
    let during = kf.get_json("/api/v1/pods?limit=500");
    assert_eq!(during["items"].as_array().unwrap().len(), 500);
    let rv = list_rv(&kf);
    assert!(rv >= seen_rv);
    seen_rv = rv;
    // An edit answers at once, saying why it was not saved.
    let started = std::time::Instant::now();
    let (code, status) = post(&format!("{}/admin/v1/clusters", kf.url), &serde_json::json!({"name": "m2", "url": dead_port_url()}));
    assert!(started.elapsed() < Duration::from_secs(5), "the edit answered within 5 s");
    assert_eq!(code, 507, "{status}");
    assert_eq!(status["kind"], "Status");
    assert!(status["message"].as_str().unwrap().contains("no space left on device"), "{status}");

    // Space returns: ingestion resumes by itself.
    let grown = Command::new("mount").args(["-o", "remount,size=300m"]).arg(&data).status().unwrap();
    assert!(grown.success());
    wait_for(Duration::from_secs(180), "kubefold ready after the disk grew", || {
        if let Ok(rv) = std::panic::catch_unwind(|| list_rv(&kf)) {
            assert!(rv >= seen_rv, "the resourceVersion went back from {seen_rv} to {rv}");
            seen_rv = rv;
        }
        kf.get("/readyz").0 == 200
    });
    assert!(kf.get_json("/admin/v1/stats")["storeFault"].is_null());
    assert_converged(&kf, &members, "/api/v1/pods", "v1/pods");
    assert!(list_rv(&kf) >= seen_rv);
    kf.stop();
}

/// A data dir emptied on purpose (a new disk) while clients hold
/// resourceVersions up to N: with `--min-resource-version N` kubefold
/// serves only resourceVersions above N, a watch from an older one gets
/// 410 Expired (the client lists again), and a restart keeps it so.
#[test]
fn an_empty_data_dir_continues_above_a_minimum_resource_version() {
    let (_tmp, data) = data_dir();
    let members = demo_members(1, 0.0);
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &["--min-resource-version", "250000"]);
    kf.wait_ready();
    let rv = list_rv(&kf);
    assert!(rv > 250_000, "listed at {rv}");
    let items = kf.get_json("/api/v1/pods")["items"].as_array().unwrap().clone();
    assert!(!items.is_empty());
    for item in &items {
        let object_rv: u64 = item["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert!(object_rv > 250_000, "{item}");
    }
    let resp = reqwest::blocking::get(format!("{}/api/v1/pods?watch=1&resourceVersion=1000&timeoutSeconds=5", kf.url)).unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let lines: Vec<Value> = resp.text().unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((lines[0]["type"].as_str(), lines[0]["object"]["code"].as_u64()), (Some("ERROR"), Some(410)), "{lines:?}");
    kf.stop();
    // Restarted without the flag: it goes on from where it was.
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    assert!(list_rv(&kf) >= rv);
    kf.stop();
}

/// A data dir kubefold cannot use is the operator's error: one line on
/// stderr naming it, exit status 1, no stack backtrace even when
/// backtraces are asked for.
#[test]
fn an_unusable_data_dir_is_one_clear_line() {
    let base = tempfile::tempdir().unwrap();
    let not_a_dir = base.path().join("data");
    std::fs::write(&not_a_dir, b"not a data dir").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kubefold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&not_a_dir)
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("kubefold: ") && lines[0].contains(&*not_a_dir.to_string_lossy()), "{stderr}");
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
}

/// A slow disk (every commit stalls 5 s) delays ingestion only: lists,
/// health checks and a watch answer at once meanwhile, the watch gets the
/// events once they are committed, and the commit latency histogram shows
/// the stall.
#[test]
fn a_slow_disk_delays_ingestion_never_reads_or_watches() {
    let (_tmp, data) = data_dir();
    let members = demo_members(1, 0.0);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubefold"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(&data);
    for (name, url) in cluster_flags(&members) {
        cmd.arg("--cluster").arg(format!("{name}={url}"));
    }
    cmd.env("KUBEFOLD_INJECT_STORE_FAULT", "stall:5000");
    let kf = Kubefold::spawn(cmd);
    let quick = |what: &str, path: &str| {
        let started = std::time::Instant::now();
        let (code, body) = kf.get(path);
        assert!(started.elapsed() < Duration::from_millis(2_500), "{what} took {:?} while commits stall", started.elapsed());
        (code, body)
    };
    let client = reqwest::blocking::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let started = std::time::Instant::now();
    let watch = client.get(format!("{}/api/v1/namespaces?watch=1&timeoutSeconds=60", kf.url)).send().unwrap();
    assert_eq!(watch.status().as_u16(), 200);
    assert!(started.elapsed() < Duration::from_millis(2_500), "the watch answered after {:?}", started.elapsed());
    let watch_lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut first = None;
        for line in std::io::BufReader::new(watch).lines().map_while(Result::ok) {
            let event: Value = serde_json::from_str(&line).unwrap();
            if event["type"] == "ADDED" {
                first = Some(event);
                break;
            }
        }
        first
    });
    for _ in 0..10 {
        let (code, _) = quick("a list", "/api/v1/pods?limit=10");
        assert_eq!(code, 200);
        quick("/readyz", "/readyz?verbose");
        quick("the stats", "/admin/v1/stats");
        std::thread::sleep(Duration::from_millis(500));
    }
    let added = watch_lines.join().unwrap().expect("the watch gets the namespaces once committed");
    assert!(added["object"]["metadata"]["name"].is_string());
    let metrics = kf.get("/metrics").1;
    let value = |name: &str| -> f64 {
        metrics.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' ')).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
    };
    let (sum, count) = (value("kubefold_commit_duration_seconds_sum"), value("kubefold_commit_duration_seconds_count"));
    assert!(count > 0.0 && sum / count >= 4.5, "commits took {sum} s over {count}");
    kf.kill();
}

/// The record log segments of a data dir.
fn segments(data: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(data.join("log")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "seg")).collect();
    found.sort();
    found
}

/// A record log damaged in several ways (bytes flipped, truncated, a
/// segment missing), with no index snapshot to start from: by default
/// kubefold moves the damaged files into a quarantine directory it names,
/// starts above the highest resourceVersion it served, lists the member
/// again and serves every object; a watch from the lost history gets 410.
/// With `store.onCorruption: refuse` it does not start, in one line.
#[test]
fn a_damaged_record_log_is_quarantined_and_rebuilt_from_the_members() {
    let members = demo_members(1, 0.0);
    let damages: [(&str, fn(&Path)); 3] = [
        ("bytes flipped", |seg| {
            let mut bytes = std::fs::read(seg).unwrap();
            for i in (0..bytes.len()).step_by(97) {
                bytes[i] ^= 0x5a;
            }
            std::fs::write(seg, bytes).unwrap();
        }),
        ("truncated", |seg| {
            let len = std::fs::metadata(seg).unwrap().len();
            std::fs::OpenOptions::new().write(true).open(seg).unwrap().set_len(len / 3).unwrap();
        }),
        ("missing", |seg| std::fs::remove_file(seg).unwrap()),
    ];
    for (what, damage) in damages {
        let (_tmp, data) = data_dir();
        let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
        kf.wait_ready();
        let served = list_rv(&kf);
        let objects = kf.get_json("/api/v1/pods")["items"].as_array().unwrap().len();
        kf.stop();
        let _ = std::fs::remove_file(data.join("index.snapshot"));
        damage(&segments(&data)[0]);

        // refuse: one line, the data dir left as it was.
        let (_cfg_dir, config) = config_file("store:\n  onCorruption: refuse\n");
        let output = Command::new(env!("CARGO_BIN_EXE_kubefold"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config", &config, "--data-dir"])
            .arg(&data)
            .env("RUST_LOG", "off")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{what}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.starts_with("kubefold: ") && stderr.contains("corrupt") && stderr.trim().lines().count() == 1, "{what}: {stderr}");
        assert!(!std::fs::read_dir(&data).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("quarantine-")));

        // repair (the default).
        let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
        kf.wait_ready();
        let quarantine: Vec<PathBuf> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("quarantine-")).collect();
        assert_eq!(quarantine.len(), 1, "{what}");
        assert!(std::fs::read_to_string(quarantine[0].join("damage.txt")).unwrap().contains("corrupt"), "{what}: the quarantine says what was damaged");
        if what != "missing" {
            assert!(quarantine[0].join(segments(&data)[0].file_name().unwrap()).exists(), "{what}: the damaged segment is kept");
        }
        assert!(kf.logs().contains(&*quarantine[0].to_string_lossy()), "{what}: the log names the quarantine directory");
        let rv = list_rv(&kf);
        assert!(rv > served, "{what}: listed at {rv}, served {served} before");
        assert_eq!(kf.get_json("/api/v1/pods")["items"].as_array().unwrap().len(), objects, "{what}");
        let resp = reqwest::blocking::get(format!("{}/api/v1/pods?watch=1&resourceVersion={served}&timeoutSeconds=5", kf.url)).unwrap();
        let lines: Vec<Value> = resp.text().unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!((lines[0]["type"].as_str(), lines[0]["object"]["code"].as_u64()), (Some("ERROR"), Some(410)), "{what}: {lines:?}");
        assert_converged(&kf, &members, "/api/v1/pods", "v1/pods");
        kf.stop();
    }
}

/// Runs `kubefold` with `args` (an offline command); its stdout.
fn offline(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubefold")).args(args).env("RUST_LOG", "off").output().unwrap();
    assert!(out.status.success(), "kubefold {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A restore of an older backup while clients hold newer resourceVersions:
/// the backup's header records the highest resourceVersion the store may
/// have served, and the restored data dir serves only above it (or above
/// a higher `--min-resource-version`); a watch from a resourceVersion
/// served after the backup gets 410, one from the backup's own history
/// still works, and the member converges.
#[test]
fn a_restore_of_an_older_backup_continues_above_its_headers_minimum() {
    let (tmp, data) = data_dir();
    let members = demo_members(1, 0.0);
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let backed_up = list_rv(&kf);
    kf.stop();
    let file = tmp.path().join("old.backup");
    let said = offline(&["backup", "--data-dir", data.to_str().unwrap(), "--out", file.to_str().unwrap()]);
    let header = String::from_utf8_lossy(&std::fs::read(&file).unwrap()[..100]).into_owned();
    let min_rv: u64 = header.lines().nth(2).and_then(|l| l.strip_prefix("min-resource-version ")?.parse().ok()).unwrap_or_else(|| panic!("{header:?}"));
    assert!(min_rv > backed_up, "{header:?}");
    assert!(said.contains(&format!("min-resource-version {min_rv}")), "{said}");

    // Life goes on after the backup: a new pod, a newer resourceVersion.
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let client = reqwest::blocking::Client::new();
    let pod = serde_json::json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"after","namespace":"default"},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}});
    assert!(client.post(format!("{}/api/v1/namespaces/default/pods", members[0].1.url())).json(&pod).send().unwrap().status().is_success());
    wait_for(Duration::from_secs(30), "the new pod served", || kf.get("/api/v1/namespaces/default/pods/after_member1").0 == 200);
    let newer = list_rv(&kf);
    assert!(newer > backed_up && newer < min_rv);
    let objects = kf.get_json("/api/v1/pods")["items"].as_array().unwrap().len();
    kf.stop();

    // The old backup restored: served above its header's minimum.
    let restored = tmp.path().join("restored");
    let said = offline(&["restore", "--in", file.to_str().unwrap(), "--data-dir", restored.to_str().unwrap()]);
    assert!(said.contains(&format!("head resourceVersion {backed_up}, continuing above resourceVersion {min_rv}")), "{said}");
    let kf = Kubefold::serve(&restored, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let rv = list_rv(&kf);
    assert!(rv >= min_rv && rv > newer, "listed at {rv}; {newer} was served before");
    let watch = |from: u64| -> Vec<Value> {
        let resp = reqwest::blocking::get(format!("{}/api/v1/pods?watch=1&resourceVersion={from}&timeoutSeconds=3", kf.url)).unwrap();
        resp.text().unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let lines = watch(newer);
    assert_eq!((lines[0]["type"].as_str(), lines[0]["object"]["code"].as_u64()), (Some("ERROR"), Some(410)), "{lines:?}");
    // From the backup's head: the member's new list brings the new pod.
    let lines = watch(backed_up);
    assert!(lines.iter().all(|l| l["type"] != "ERROR"), "{lines:?}");
    assert!(lines.iter().any(|l| l["type"] == "ADDED" && l["object"]["metadata"]["name"] == "after_member1"), "{lines:?}");
    assert_eq!(kf.get_json("/api/v1/pods")["items"].as_array().unwrap().len(), objects);
    assert_converged(&kf, &members, "/api/v1/pods", "v1/pods");
    kf.stop();

    // A higher minimum known (a newer backup's header, the old rv-ceiling).
    let again = tmp.path().join("again");
    let above = min_rv + 50_000;
    offline(&["restore", "--in", file.to_str().unwrap(), "--data-dir", again.to_str().unwrap(), "--min-resource-version", &above.to_string()]);
    let kf = Kubefold::serve(&again, &cluster_flags(&members), &[]);
    kf.wait_ready();
    assert!(list_rv(&kf) >= above);
    kf.stop();
}
