//! Helpers shared by the simulator's integration tests: starting a
//! simulator on port 0 and talking to it over real HTTP.

#![allow(dead_code)]

use std::time::Duration;

use futures::StreamExt;
use kubefold_testdata::{SimConfig, SimHandle, Workload};
use serde_json::Value;

/// A demo simulator named `member1` with seed 7.
pub fn demo() -> SimHandle {
    start(SimConfig { workload: Workload::Demo, seed: 7, ..SimConfig::default() })
}

/// Starts a simulator with `config`.
pub fn start(config: SimConfig) -> SimHandle {
    kubefold_testdata::start(config).expect("simulator starts")
}

/// An HTTP client.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("client")
}

/// A response: status code and JSON body (`Null` when not JSON).
pub struct Answer {
    pub code: u16,
    pub body: Value,
    pub content_type: String,
}

async fn answer(response: reqwest::Response) -> Answer {
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = response.bytes().await.expect("body");
    Answer { code, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null), content_type }
}

/// GET `path`.
pub async fn get(sim: &SimHandle, path: &str) -> Answer {
    answer(client().get(format!("{}{path}", sim.url())).send().await.expect("request")).await
}

/// A request with a body and content type.
pub async fn send(sim: &SimHandle, method: &str, path: &str, content_type: &str, body: &str) -> Answer {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let request = client()
        .request(method, format!("{}{path}", sim.url()))
        .header("content-type", content_type)
        .body(body.to_string());
    answer(request.send().await.expect("request")).await
}

/// The names of a list's items.
pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().expect("name").to_string())
        .collect()
}

/// An open watch stream, read event by event.
pub struct Watch {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: Vec<u8>,
    pub code: u16,
    pub transfer_encoding: String,
}

impl Watch {
    /// Opens `GET path` (which must be a watch).
    pub async fn open(sim: &SimHandle, path: &str) -> Watch {
        let response = client().get(format!("{}{path}", sim.url())).send().await.expect("watch request");
        let code = response.status().as_u16();
        let transfer_encoding = response
            .headers()
            .get("transfer-encoding")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        Watch { stream: response.bytes_stream().boxed(), buffer: Vec::new(), code, transfer_encoding }
    }

    /// The next event, `None` when the stream ended or nothing came within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(newline) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=newline).collect();
                return Some(serde_json::from_slice(&line).expect("one JSON event per line"));
            }
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(chunk))) => self.buffer.extend_from_slice(&chunk),
                _ => return None,
            }
        }
    }

    /// Events until `count` arrived or nothing came for `wait`.
    pub async fn take(&mut self, count: usize, wait: Duration) -> Vec<Value> {
        let mut events = Vec::new();
        while events.len() < count {
            match self.next(wait).await {
                Some(event) => events.push(event),
                None => break,
            }
        }
        events
    }

    /// Whether the server ended the stream within `wait` (after any remaining events).
    pub async fn ended(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(None) => return true,
                Ok(Some(Ok(chunk))) => self.buffer.extend_from_slice(&chunk),
                Ok(Some(Err(_))) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// `(type, object name)` of an event.
pub fn summary(event: &Value) -> (String, String) {
    (
        event["type"].as_str().unwrap_or_default().to_string(),
        event["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// The resourceVersion of an object or list as a number.
pub fn rv(value: &Value) -> u64 {
    value["metadata"]["resourceVersion"].as_str().expect("resourceVersion").parse().expect("integer")
}
