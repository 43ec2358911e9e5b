//! kube-rs treats the simulator as a cluster: its watcher lists in pages of
//! 500 (continue tokens), then watches from the list's resourceVersion, and
//! with streaming lists (`sendInitialEvents`) gets the initial-events-end
//! bookmark. Typed objects (k8s-openapi) decode.

mod common;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher::{self, watcher, Event};
use kube::{Client, Config};
use kubefold_testdata::{SimConfig, SimHandle, Workload};

fn client(sim: &SimHandle) -> Client {
    Client::try_from(Config::new(sim.url().parse().expect("url"))).expect("client")
}

/// Reads watcher events until `InitDone`; returns the number of `InitApply`.
async fn initial<S>(stream: &mut S) -> usize
where
    S: futures::Stream<Item = Result<Event<Pod>, watcher::Error>> + Unpin,
{
    let mut objects = 0;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("watcher event in time")
            .expect("stream open")
            .expect("no watcher error");
        match event {
            Event::Init => {}
            Event::InitApply(_) => objects += 1,
            Event::InitDone => return objects,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn watcher_lists_in_pages_then_watches_from_the_list_version() {
    let sim = common::start(SimConfig { workload: Workload::Demo, pods: 1200, ..SimConfig::default() });
    let pods: Api<Pod> = Api::all(client(&sim));
    sim.clear_requests();
    let mut stream = watcher(pods, watcher::Config::default()).boxed();
    assert_eq!(initial(&mut stream).await, 1200 + 16);

    let patched = Api::<Pod>::namespaced(client(&sim), "default")
        .patch("web-0", &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"labels": {"seen": "kube-rs"}}})))
        .await
        .expect("patch");
    let event = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().unwrap().unwrap();
    match event {
        Event::Apply(pod) => {
            assert_eq!(pod.metadata.name.as_deref(), Some("web-0"));
            assert_eq!(pod.metadata.resource_version, patched.metadata.resource_version);
        }
        other => panic!("unexpected {other:?}"),
    }
    let requests = sim.requests();
    let lists: Vec<&kubefold_testdata::RequestRecord> = requests.iter().filter(|r| r.path == "/api/v1/pods" && !r.watch).collect();
    assert_eq!(lists.len(), 3, "1216 pods in pages of 500: {requests:?}");
    assert!(lists[0].query.contains("limit=500"));
    assert!(lists[1].query.contains("continue="));
    let watches: Vec<_> = requests.iter().filter(|r| r.watch).collect();
    assert_eq!(watches.len(), 1);
    assert!(watches[0].query.contains("resourceVersion="));
}

#[tokio::test]
async fn streaming_list_watcher_gets_the_initial_events_end_bookmark() {
    let sim = common::start(SimConfig { workload: Workload::Demo, ..SimConfig::default() });
    let pods: Api<Pod> = Api::namespaced(client(&sim), "default");
    let mut stream = watcher(pods, watcher::Config::default().streaming_lists()).boxed();
    assert_eq!(initial(&mut stream).await, 3);
    assert!(sim.requests().iter().all(|r| r.watch), "no list request: {:?}", sim.requests());
}

#[tokio::test]
async fn typed_lists_and_server_side_apply() {
    let sim = common::start(SimConfig { workload: Workload::Demo, ..SimConfig::default() });
    let deployments: Api<Deployment> = Api::all(client(&sim));
    let list = deployments.list(&ListParams::default().labels("app=frontend")).await.expect("list");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].spec.as_ref().unwrap().replicas, Some(3));
    let pods: Vec<Pod> = Api::<Pod>::all(client(&sim))
        .list(&ListParams::default().fields("spec.nodeName=member1-node-1"))
        .await
        .expect("list")
        .items;
    assert_eq!(pods.len(), 5);
    let shop: Api<Deployment> = Api::namespaced(client(&sim), "shop");
    let applied = shop
        .patch(
            "frontend",
            &PatchParams::apply("kube-rs-test").force(),
            &Patch::Apply(serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "frontend"}, "spec": {"replicas": 4}})),
        )
        .await
        .expect("apply");
    assert_eq!(applied.spec.unwrap().replicas, Some(4));
    let error = shop.get("nope").await.unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.reason, "NotFound");
        }
        other => panic!("unexpected {other:?}"),
    }
    let all: Vec<Pod> = Api::<Pod>::all(client(&sim)).list(&ListParams::default().limit(7)).await.unwrap().items;
    assert_eq!(all.len(), 7);
    let _ = futures::stream::iter(Vec::<Result<(), ()>>::new()).try_collect::<Vec<_>>().await;
}
