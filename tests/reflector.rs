//! A kube-rs reflector (the informer of Rust clients) against kubefold
//! converges to exactly the union of the members' pods while they churn, and
//! across a kubefold restart it resumes its watch without a relist.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, Client};
use serde_json::{json, Value};

/// (qualified name, member RV) of every pod of every member, read from the members.
fn members_state(members: &[(String, kubefold_testdata::SimHandle)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (cluster, sim) in members {
        let list: Value = serde_json::from_str(&http_get(&format!("{}/api/v1/pods", sim.url())).1).unwrap();
        for p in list["items"].as_array().unwrap() {
            out.insert(
                format!("{}/{}_{cluster}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap()),
                p["metadata"]["resourceVersion"].as_str().unwrap().to_string(),
            );
        }
    }
    out
}

fn reflected(store: &reflector::Store<Pod>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|p| {
            let m = &p.metadata;
            let member_rv = m.annotations.as_ref().and_then(|a| a.get("kubefold.io/member-resource-version")).cloned().unwrap_or_default();
            (format!("{}/{}", m.namespace.clone().unwrap_or_default(), m.name.clone().unwrap_or_default()), member_rv)
        })
        .collect()
}

/// Creates, changes and deletes pods in the members for `seconds`.
fn churn(members: &[(String, kubefold_testdata::SimHandle)], tag: &str, rounds: usize) {
    let client = reqwest::blocking::Client::new();
    for i in 0..rounds {
        let (_, sim) = &members[i % members.len()];
        let url = sim.url();
        let name = format!("{tag}-{i}");
        let pod = json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"namespace":"default","labels":{"churn":tag}},"spec":{"containers":[{"name":"c","image":"nginx:1.27"}]}});
        client.post(format!("{url}/api/v1/namespaces/default/pods")).json(&pod).send().unwrap();
        if i % 3 == 1 {
            client
                .patch(format!("{url}/api/v1/namespaces/default/pods/{name}"))
                .header("Content-Type", "application/merge-patch+json")
                .body(r#"{"metadata":{"labels":{"touched":"yes"}}}"#)
                .send()
                .unwrap();
        }
        if i % 3 == 2 {
            client.delete(format!("{url}/api/v1/namespaces/default/pods/{tag}-{}", i - 2)).send().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn converge(store: &reflector::Store<Pod>, members: &[(String, kubefold_testdata::SimHandle)]) {
    for _ in 0..300 {
        let members = members.iter().map(|(n, s)| (n.clone(), s.url())).collect::<Vec<_>>();
        let expected = tokio::task::spawn_blocking(move || {
            let handles: Vec<(String, String)> = members;
            let mut out = BTreeMap::new();
            for (cluster, url) in handles {
                let list: Value = serde_json::from_str(&http_get(&format!("{url}/api/v1/pods")).1).unwrap();
                for p in list["items"].as_array().unwrap() {
                    out.insert(
                        format!("{}/{}_{cluster}", p["metadata"]["namespace"].as_str().unwrap(), p["metadata"]["name"].as_str().unwrap()),
                        p["metadata"]["resourceVersion"].as_str().unwrap().to_string(),
                    );
                }
            }
            out
        })
        .await
        .unwrap();
        if reflected(store) == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(reflected(store), members_state(members), "the reflector never converged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_converges_and_resumes_without_relist_after_restart() {
    let members = Arc::new(demo_members(2, 0.0));
    let (_tmp, dir) = data_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let flags = cluster_flags(&members);
    let (l2, d2, f2) = (listen.clone(), dir.clone(), flags.clone());
    let kf = tokio::task::spawn_blocking(move || {
        let kf = Kubefold::serve_at(&l2, &d2, &f2, &[]);
        kf.wait_ready();
        kf
    })
    .await
    .unwrap();

    let config = kube::Config::new(kf.url.parse().unwrap());
    let client = Client::try_from(config).unwrap();
    let api: Api<Pod> = Api::all(client);
    let (store, writer) = reflector::store();
    let inits = Arc::new(AtomicUsize::new(0));
    let counter = inits.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .inspect(move |e| {
            if matches!(e, Ok(watcher::Event::Init)) {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        })
        .reflect(writer)
        .applied_objects();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    store.wait_until_ready().await.unwrap();

    let m = members.clone();
    tokio::task::spawn_blocking(move || churn(&m, "a", 60)).await.unwrap();
    converge(&store, &members).await;
    assert_eq!(inits.load(Ordering::SeqCst), 1, "one initial list");

    // Restart kubefold on the same port and data dir while the reflector runs.
    let (l2, d2, f2) = (listen.clone(), dir.clone(), flags.clone());
    let kf = tokio::task::spawn_blocking(move || {
        kf.stop();
        let kf = Kubefold::serve_at(&l2, &d2, &f2, &[]);
        kf.wait_ready();
        kf
    })
    .await
    .unwrap();
    let m = members.clone();
    tokio::task::spawn_blocking(move || churn(&m, "b", 60)).await.unwrap();
    converge(&store, &members).await;
    assert_eq!(inits.load(Ordering::SeqCst), 1, "the reflector resumed its watch: no relist");
    let metrics = tokio::task::spawn_blocking(move || {
        let m = kf.get("/metrics").1;
        kf.stop();
        m
    })
    .await
    .unwrap();
    let lists: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("kubefold_requests_total{") && l.contains("verb=\"list\"") && l.contains("resource=\"v1/pods\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum();
    assert_eq!(lists, 0.0, "the restarted kubefold served no pod list");
    task.abort();
}
