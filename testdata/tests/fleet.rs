//! Many members in one simulator process (`kubefold sim --clusters N`): each
//! member answers on its own port as a cluster of its own (its pods, its
//! resource versions, its watches, its discovery). The CLI and kubefold over
//! a fleet: tests/fleet.rs of the workspace.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use kubefold_testdata::sim::fleet::{self, FleetConfig};
use kubefold_testdata::{SimConfig, Workload};
use serde_json::Value;

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client")
}

async fn get(url: &str) -> (u16, Value) {
    let response = client().get(url).send().await.expect("request");
    let code = response.status().as_u16();
    (code, response.json().await.unwrap_or(Value::Null))
}

fn names(list: &Value) -> BTreeSet<String> {
    list["items"].as_array().expect("items").iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

fn rv(list: &Value) -> u64 {
    list["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn each_member_of_a_fleet_answers_as_a_cluster_of_its_own() {
    let config = FleetConfig {
        clusters: 4,
        pods: 10,
        member: SimConfig { workload: Workload::Empty, ..SimConfig::default() },
        ..FleetConfig::default()
    };
    let fleet = fleet::start(config).expect("fleet starts");
    let members = fleet.members();
    assert_eq!(members.len(), 4);
    let ports: BTreeSet<u16> = members.iter().map(|m| m.addr.port()).collect();
    assert_eq!(ports.len(), 4, "a port each");
    let mut versions = Vec::new();
    for (i, member) in members.iter().enumerate() {
        assert_eq!(member.name, format!("member{}", i + 1));
        let (code, pods) = get(&format!("{}/api/v1/pods", member.url())).await;
        assert_eq!(code, 200, "{pods}");
        // 10 pods over 4 members: 3, 3, 2, 2, each member numbering its own from load-0.
        let expected: BTreeSet<String> = (0..if i < 2 { 3 } else { 2 }).map(|j| format!("load-{j}")).collect();
        assert_eq!(names(&pods), expected, "{}", member.name);
        // Nodes of a demo member carry the cluster's name; here the pods do, on their node name.
        let node = pods["items"][0]["spec"]["nodeName"].as_str().unwrap().to_string();
        assert!(node.starts_with(&format!("{}-node-", member.name)), "{node}");
        versions.push(rv(&pods));
        let (code, discovery) = get(&format!("{}/api/v1", member.url())).await;
        assert_eq!((code, discovery["kind"].as_str()), (200, Some("APIResourceList")));
    }
    let distinct: BTreeSet<u64> = versions.iter().copied().collect();
    assert_eq!(distinct.len(), 4, "each member has its own resource versions: {versions:?}");

    // A watch of member2 sees member2's change and not member3's.
    let (m2, m3) = (&members[1], &members[2]);
    let from = rv(&get(&format!("{}/api/v1/namespaces/load-1/pods", m2.url())).await.1);
    let response = client().get(format!("{}/api/v1/pods?watch=true&resourceVersion={from}", m2.url())).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let patch = |url: String| async move {
        let response = client()
            .patch(url)
            .header("content-type", "application/merge-patch+json")
            .body(r#"{"metadata":{"labels":{"touched":"yes"}}}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
    };
    patch(format!("{}/api/v1/namespaces/load-1/pods/load-1", m3.url())).await;
    patch(format!("{}/api/v1/namespaces/load-1/pods/load-1", m2.url())).await;
    let mut buffer = Vec::new();
    let event: Value = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(newline) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=newline).collect();
                return serde_json::from_slice(&line).unwrap();
            }
            buffer.extend_from_slice(&stream.next().await.expect("an event").unwrap());
        }
    })
    .await
    .expect("member2's change arrives within 5 s");
    assert_eq!(event["type"], "MODIFIED");
    assert_eq!(event["object"]["metadata"]["labels"]["touched"], "yes");
    assert!(event["object"]["spec"]["nodeName"].as_str().unwrap().starts_with("member2-"), "member2's own pod: {event}");
    // The edited pod is stored whole from now on and read back as edited.
    let (_, pod) = get(&format!("{}/api/v1/namespaces/load-1/pods/load-1", m3.url())).await;
    assert_eq!(pod["metadata"]["labels"]["touched"], "yes");
    assert_eq!(pod["metadata"]["labels"]["app"], "load");

    // The offline fault needs a server of its own: refused, the member keeps answering.
    let response = client()
        .put(format!("{}/sim/faults", m2.url()))
        .header("content-type", "application/json")
        .body(r#"{"offline":{"mode":"refuse"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(get(&format!("{}/api/v1/pods", m2.url())).await.0, 200);
    fleet.stop();
}
