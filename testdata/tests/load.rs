//! Load pods: `--pods N` builds N realistic pods directly (not through
//! HTTP), each 2 to 4 KB of JSON, spread over namespaces load-0..load-9
//! with labels app=load and shard=s{i%100}; lists stream them quickly.

mod common;

use std::time::{Duration, Instant};

use common::{get, names};
use kubefold_testdata::{SimConfig, Workload};

#[tokio::test]
async fn a_thousand_load_pods_of_two_to_four_kilobytes() {
    let started = Instant::now();
    let sim = common::start(SimConfig { workload: Workload::Empty, pods: 1000, ..SimConfig::default() });
    assert!(started.elapsed() < Duration::from_secs(20));
    let all = get(&sim, "/api/v1/pods?labelSelector=app%3Dload").await;
    let items = all.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 1000);
    for item in items {
        let size = serde_json::to_vec(item).unwrap().len();
        assert!((2048..=4096).contains(&size), "{} is {size} bytes", item["metadata"]["name"]);
    }
    let shard = get(&sim, "/api/v1/pods?labelSelector=shard%3Ds7").await;
    let mut shard_names = names(&shard.body);
    shard_names.sort();
    let mut expected: Vec<String> = (0..10).map(|k| format!("load-{}", 7 + 100 * k)).collect();
    expected.sort();
    assert_eq!(shard_names, expected);
    let namespace = get(&sim, "/api/v1/namespaces/load-3/pods?limit=5").await;
    assert_eq!(names(&namespace.body), ["load-103", "load-113", "load-123", "load-13", "load-133"]);
    assert_eq!(namespace.body["metadata"]["remainingItemCount"], 95);
    let namespaces = get(&sim, "/api/v1/namespaces").await;
    assert_eq!(names(&namespaces.body).len(), 14);
}

#[tokio::test]
async fn every_object_has_its_own_resource_version() {
    let sim = common::start(SimConfig { workload: Workload::Demo, pods: 300, ..SimConfig::default() });
    let all = get(&sim, "/api/v1/pods").await;
    let mut versions: Vec<u64> = all.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap())
        .collect();
    let count = versions.len();
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), count);
    assert!(common::rv(&all.body) >= *versions.last().unwrap());
}

/// 100,000 pods load in seconds and list as one 300 MB response. Run with
/// `cargo test --release -p kubefold-testdata --test load -- --ignored`.
#[tokio::test]
#[ignore = "large: run in release"]
async fn a_hundred_thousand_pods_load_and_list_quickly() {
    let started = Instant::now();
    let sim = common::start(SimConfig { workload: Workload::Demo, pods: 100_000, ..SimConfig::default() });
    let loaded = started.elapsed();
    let started = Instant::now();
    let response = common::client().get(format!("{}/api/v1/pods", sim.url())).send().await.unwrap();
    let bytes = response.bytes().await.unwrap();
    let listed = started.elapsed();
    eprintln!("loaded in {loaded:?}, listed {} MB in {listed:?}", bytes.len() / 1_000_000);
    assert!(loaded < Duration::from_secs(30), "{loaded:?}");
    assert!(listed < Duration::from_secs(10), "{listed:?}");
    let list: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 100_000 + 16);
}
