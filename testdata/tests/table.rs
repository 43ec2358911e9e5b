//! Server-side printing as kubectl asks for it: `meta.k8s.io/v1` Tables
//! for list, get and watch (Kubernetes docs "API Concepts", section
//! "Receiving resources as Tables").

mod common;

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn table(sim: &kubefold_testdata::SimHandle, path: &str) -> (String, Value) {
    let response = common::client().get(format!("{}{path}", sim.url())).header("accept", TABLE).send().await.unwrap();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_string();
    (content_type, response.json().await.unwrap())
}

fn column_names(table: &Value) -> Vec<String> {
    table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn lists_and_gets_print_kubectl_columns() {
    let sim = common::demo();
    let (content_type, pods) = table(&sim, "/api/v1/namespaces/default/pods").await;
    assert_eq!(content_type, "application/json;as=Table;v=v1;g=meta.k8s.io");
    assert_eq!(pods["kind"], "Table");
    assert_eq!(pods["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(column_names(&pods), ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]);
    let rows = pods["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0]["cells"].as_array().unwrap()[..4], [Value::from("web-0"), Value::from("1/1"), Value::from("Running"), Value::from("0")]);
    assert_eq!(rows[0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(rows[0]["object"]["metadata"]["namespace"], "default");
    let (_, deployments) = table(&sim, "/apis/apps/v1/namespaces/shop/deployments").await;
    assert_eq!(&column_names(&deployments)[..5], ["Name", "Ready", "Up-to-date", "Available", "Age"]);
    let (_, one) = table(&sim, "/apis/apps/v1/namespaces/shop/deployments/frontend").await;
    assert_eq!(one["rows"][0]["cells"][1], "3/3");
    let (_, paged) = table(&sim, "/api/v1/pods?limit=5").await;
    assert_eq!(paged["rows"].as_array().unwrap().len(), 5);
    assert!(paged["metadata"]["continue"].is_string());
    // Plain JSON when not asked.
    assert_eq!(common::get(&sim, "/api/v1/namespaces/default/pods").await.body["kind"], "PodList");
}

#[tokio::test]
async fn watch_events_are_tables_with_headers_once() {
    let sim = common::demo();
    let response = common::client()
        .get(format!("{}/api/v1/namespaces/default/pods?watch=1", sim.url()))
        .header("accept", TABLE)
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut buffer = Vec::new();
    let mut events = Vec::new();
    while events.len() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap().unwrap().unwrap();
        buffer.extend_from_slice(&chunk);
        while let Some(i) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=i).collect();
            events.push(serde_json::from_slice::<Value>(&line).unwrap());
        }
    }
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["kind"], "Table");
    assert_eq!(events[0]["object"]["rows"][0]["cells"][0], "web-0");
    assert!(events[0]["object"]["columnDefinitions"].is_array());
    assert!(events[1]["object"]["columnDefinitions"].is_null());
    assert_eq!(events[2]["object"]["rows"][0]["cells"][0], "web-2");
}
