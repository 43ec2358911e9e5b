//! The manifests of `ops/etcd/`: every YAML document parses, every file a
//! kustomization names exists, the Deployment runs three replicas that a
//! PodDisruptionBudget covers, and every flag given to kubefold there (and
//! in the systemd drop-in) is one `kubefold serve --help` lists.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn ops(rest: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ops/etcd").join(rest)
}

/// Every document of every YAML file of `ops/etcd/kubernetes`, with its file.
fn documents() -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(ops("kubernetes")).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        out.extend(docs.into_iter().filter(|d| !d.is_null()).map(|d| (file.clone(), d)));
    }
    out
}

/// The `--name` part of each `--name=value` or `--name value` argument.
fn flag_names<'a>(args: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    args.into_iter().filter(|a| a.starts_with("--")).map(|a| a.split('=').next().unwrap().to_string()).collect()
}

fn serve_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kubefold")).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_etcd_manifests_parse_and_use_flags_kubefold_serve_has() {
    let docs = documents();
    let help = serve_help();
    let kind = |k: &'static str| docs.iter().filter(move |(_, d)| d["kind"] == k).map(|(_, d)| d);

    // Every resource a kustomization names is there.
    for (file, doc) in docs.iter().filter(|(_, d)| d["kind"] == "Kustomization") {
        for resource in doc["resources"].as_array().unwrap() {
            let path = file.parent().unwrap().join(resource.as_str().unwrap());
            assert!(path.exists(), "{} names {}, which is missing", file.display(), path.display());
        }
    }

    // Three kubefold replicas, a PodDisruptionBudget that selects them.
    let deployment = kind("Deployment").find(|d| d["metadata"]["name"] == "kubefold").expect("the kubefold Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let pdb = kind("PodDisruptionBudget").find(|d| d["metadata"]["name"] == "kubefold").expect("kubefold's PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 2);
    for (key, value) in pdb["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[key], value, "the PodDisruptionBudget selects the Deployment's pods");
    }
    let etcd = kind("StatefulSet").find(|d| d["metadata"]["name"] == "etcd").expect("the etcd StatefulSet");
    assert_eq!(etcd["spec"]["replicas"], 3);

    // kubefold's flags exist.
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let flags = flag_names(args.iter().copied());
    for required in ["--etcd-servers", "--etcd-lease-ttl", "--etcd-replica-id", "--config"] {
        assert!(flags.iter().any(|f| f == required), "the Deployment passes {required}: {flags:?}");
    }
    // The etcd servers are the StatefulSet's pods.
    let servers = args.iter().find_map(|a| a.strip_prefix("--etcd-servers=")).unwrap();
    assert_eq!(servers.split(',').count(), 3, "{servers}");

    let unit = std::fs::read_to_string(ops("systemd/kubefold.service.d/etcd.conf")).unwrap();
    let exec: Vec<&str> = unit.lines().skip_while(|l| !l.starts_with("ExecStart=/")).take_while(|l| l.trim_end().ends_with('\\') || l.starts_with("ExecStart=/") || l.starts_with("    --")).flat_map(|l| l.split_whitespace()).collect();
    let unit_flags = flag_names(exec.iter().copied());
    assert!(unit_flags.iter().any(|f| f == "--etcd-servers"), "{unit_flags:?}");

    for flag in flags.iter().chain(&unit_flags) {
        assert!(help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")) || help.contains(&format!("{flag}=")), "`kubefold serve --help` has no {flag}");
    }
}
