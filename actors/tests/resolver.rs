//! The `Resolver` actor against simulated control planes over loopback HTTP:
//! its two `ClusterWatcher`s feed it, Services created over HTTP appear in
//! the table, `SetConfig` moves it to another control plane (the watchers
//! restart and relist), `SetMembers` adds and drops rows, and the control
//! plane's watcher status lands in the fleet under the control plane's name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Actor;
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::fleet::{Fleet, SyncState};
use kubefold_actors::resolver::{
    EstimatorConfig, EstimatorEventType, EstimatorStatus, Estimators, ProbeNow, Resolver, SetConfig, SetMembers,
    ENDPOINT_SLICES, SERVICES,
};
use kubefold_engine::estimator::Rule;
use kubefold_engine::index::Index;
use kubefold_engine::names::NameStyle;
use kubefold_store::{Options, Store};
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::json;

const NS: &str = "karmada-system";

async fn post(client: &reqwest::Client, url: String, body: serde_json::Value) {
    let resp = client.post(&url).json(&body).send().await.unwrap();
    let code = resp.status();
    assert!(code.is_success(), "POST {url}: {code} {}", resp.text().await.unwrap());
}

/// A control plane holding member1's ExternalName Service pointing at `target_port`.
async fn control_plane(name: &str, target_port: u16) -> SimHandle {
    let sim = kubefold_testdata::start(SimConfig { name: name.into(), workload: Workload::Empty, ..SimConfig::default() }).unwrap();
    let client = reqwest::Client::new();
    post(&client, format!("{}/api/v1/namespaces", sim.url()), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})).await;
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "karmada-scheduler-estimator-member1", "namespace": NS},
        "spec": {"type": "ExternalName", "externalName": "127.0.0.1", "ports": [{"port": 10352, "targetPort": target_port}]},
    });
    post(&client, format!("{}/api/v1/namespaces/{NS}/services", sim.url()), service).await;
    sim
}

async fn wait_for(estimators: &Estimators, what: &str, want: impl Fn(&[EstimatorStatus]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let table = estimators.table();
        if want(&table) {
            return;
        }
        assert!(Instant::now() < deadline, "table never showed {what}: {table:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn addresses(table: &[EstimatorStatus], cluster: &str) -> Option<Vec<String>> {
    table.iter().find(|r| r.endpoint.cluster == cluster).map(|r| r.endpoint.addresses.clone())
}

fn config(sim: &SimHandle) -> EstimatorConfig {
    EstimatorConfig {
        control_plane: Some(ClusterSpec::from_url(&format!("karmada-{}", sim.addr().port()), &sim.url())),
        probe_interval_seconds: 0,
        ..EstimatorConfig::default()
    }
}

#[actix::test]
async fn the_resolver_follows_its_control_plane_config_and_members() {
    let first = control_plane("karmada-a", 1111).await;
    let second = control_plane("karmada-b", 2222).await;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), &Options::default()).unwrap();
    let fleet = Fleet::new(kubefold_engine::resources::builtin(), NameStyle::Qualified, store, Index::default(), 0);
    let estimators = Estimators::new();
    let resolver = Resolver::new(config(&first), vec!["member1".into()], estimators.clone(), Arc::clone(&fleet)).unwrap().start();

    wait_for(&estimators, "member1 from the first control plane", |t| addresses(t, "member1") == Some(vec!["127.0.0.1:1111".into()])).await;
    assert!(estimators.control_plane_synced());
    // The control plane's watchers report to the fleet under its name.
    let status = fleet.status();
    let watchers = &status[&format!("karmada-{}", first.addr().port())];
    assert_eq!(watchers.keys().cloned().collect::<Vec<_>>(), vec![ENDPOINT_SLICES.to_string(), SERVICES.to_string()]);
    assert!(watchers.values().all(|w| w.state == SyncState::Synced), "{watchers:?}");

    // A Service created while watching.
    let client = reqwest::Client::new();
    let headless = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "karmada-scheduler-estimator-member2", "namespace": NS},
        "spec": {"clusterIP": "None", "ports": [{"name": "grpc", "port": 10352}]},
    });
    post(&client, format!("{}/api/v1/namespaces/{NS}/services", first.url()), headless).await;
    resolver.send(SetMembers(vec!["member1".into(), "member2".into()])).await.unwrap();
    wait_for(&estimators, "member2 headless", |t| {
        t.iter().any(|r| r.endpoint.cluster == "member2" && r.endpoint.rule == Rule::Headless)
    })
    .await;
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "member2-x", "namespace": NS, "labels": {"kubernetes.io/service-name": "karmada-scheduler-estimator-member2"}},
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": 10352}],
        "endpoints": [{"addresses": ["127.0.0.9"], "conditions": {"ready": true}}],
    });
    post(&client, format!("{}/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices", first.url()), slice).await;
    wait_for(&estimators, "member2's endpoint", |t| addresses(t, "member2") == Some(vec!["127.0.0.9:10352".into()])).await;

    // Another control plane: the watchers restart and the rows follow it.
    let mut events = estimators.subscribe();
    resolver.send(SetConfig(config(&second))).await.unwrap().unwrap();
    wait_for(&estimators, "member1 from the second control plane", |t| {
        addresses(t, "member1") == Some(vec!["127.0.0.1:2222".into()]) && t.len() == 2
    })
    .await;
    let mut seen = Vec::new();
    while let Ok(e) = events.try_recv() {
        seen.push((e.event_type, e.object.endpoint.cluster, e.object.endpoint.rule));
    }
    assert_eq!(
        seen,
        vec![
            (EstimatorEventType::Deleted, "member1".into(), Rule::ExternalName),
            (EstimatorEventType::Deleted, "member2".into(), Rule::Headless),
            (EstimatorEventType::Added, "member1".into(), Rule::ExternalName),
            (EstimatorEventType::Added, "member2".into(), Rule::DnsFallback),
        ]
    );

    // An invalid config is refused and changes nothing.
    let refused = resolver.send(SetConfig(EstimatorConfig { port: 0, ..config(&second) })).await.unwrap();
    assert_eq!(refused.unwrap_err().to_string(), "estimator config: port must be between 1 and 65535");
    // Probing is disabled (probeIntervalSeconds: 0): no probe result appears.
    resolver.send(ProbeNow).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(estimators.table().iter().all(|r| r.probe.is_none()));

    resolver.send(SetMembers(vec!["member2".into()])).await.unwrap();
    let table = estimators.table();
    assert_eq!(table.len(), 1);
    assert_eq!(table[0].endpoint.rule, Rule::DnsFallback);
    first.stop();
    second.stop();
}
