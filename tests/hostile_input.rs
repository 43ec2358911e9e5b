//! Hostile input: what an authenticated client sends cannot stall kubefold
//! for others or make it show what is not the client's to see. Deep YAML
//! and JSON bodies are refused at once while other requests go on being
//! answered; secrets of the configuration never show in logs, admin
//! answers or metrics; impersonation follows kube-apiserver's rules;
//! health details, unknown clusters, redacted tokens, data file modes and
//! backups.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

/// `levels` nested flow sequences: `[[[...]]]`.
fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

#[test]
fn deep_bodies_are_refused_at_once_while_others_are_served() {
    let members = demo_members(1, 0.0);
    let (_tmp, dir) = data_dir();
    let kf = Kubefold::serve(&dir, &cluster_flags(&members), &[]);
    kf.wait_ready();
    let pod = format!("{}/api/v1/namespaces/default/pods/web-0_member1", kf.url);
    let configmaps = format!("{}/clusters/member1/api/v1/namespaces/default/configmaps", kf.url);
    let deep = nested(70_000);
    // The attacks: YAML bodies of every kind that takes YAML, and JSON.
    let attacks: Vec<(&str, String, &str, String)> = vec![
        ("PATCH", pod.clone(), "application/apply-patch+yaml", format!("metadata:\n  annotations:\n    x: {deep}\n")),
        ("PUT", pod.clone(), "application/yaml", format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  labels: {deep}\n")),
        ("POST", configmaps.clone(), "application/yaml", format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\ndata: {deep}\n")),
        ("PATCH", pod.clone(), "application/merge-patch+json", format!("{{\"metadata\":{{\"annotations\":{deep}}}}}")),
        ("PATCH", pod.clone(), "application/strategic-merge-patch+json", format!("{{\"metadata\":{{\"labels\":{deep}}}}}")),
        ("PATCH", pod.clone(), "application/json-patch+json", format!("[{{\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":{deep}}}]")),
        ("POST", configmaps.clone(), "application/json", format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"data\":{deep}}}")),
    ];
    // Three YAML attacks at once, then the rest, beside a latency probe.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut threads = Vec::new();
    for (i, (method, url, content_type, body)) in attacks.into_iter().enumerate() {
        let done = done.clone();
        threads.push(std::thread::spawn(move || {
            if i >= 3 {
                std::thread::sleep(Duration::from_millis(200));
            }
            let started = Instant::now();
            let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
            let response = client().request(method.clone(), &url).header("Content-Type", content_type).body(body).send();
            let took = started.elapsed();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let response = response.unwrap_or_else(|e| panic!("{method} {content_type}: {e}"));
            let code = response.status().as_u16();
            let status: Value = serde_json::from_str(&response.text().unwrap()).unwrap();
            (format!("{method} {content_type}"), code, status, took)
        }));
    }
    let probe = client();
    let started = Instant::now();
    let mut probes = 0;
    while done.load(std::sync::atomic::Ordering::SeqCst) < threads.len() || probes < 10 {
        for path in ["/version", "/api/v1/namespaces/default/pods/web-0_member1", "/livez"] {
            let asked = Instant::now();
            let response = probe.get(format!("{}{path}", kf.url)).timeout(Duration::from_secs(10)).send();
            let took = asked.elapsed();
            assert!(response.as_ref().is_ok_and(|r| r.status() == 200), "GET {path} while deep bodies are decoded: {response:?}");
            assert!(took < Duration::from_secs(2), "GET {path} took {took:?} while deep bodies were decoded");
            probes += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the deep requests are not answered");
    }
    for thread in threads {
        let (what, code, status, took) = thread.join().unwrap();
        assert_eq!(code, 400, "{what}: {status}");
        assert_eq!(status["reason"], "BadRequest", "{what}: {status}");
        let message = status["message"].as_str().unwrap();
        assert!(message.contains("nested more than 100 levels"), "{what}: the Status names the limit: {message}");
        assert!(took < Duration::from_secs(5), "{what}: refused after {took:?}");
    }
    // Bodies within the limit still work, in YAML as in JSON.
    let shallow = format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0_member1\n  labels:\n    depth: \"ok\"\n  annotations:\n    nested: '{}'\n", nested(150));
    let response = client()
        .patch(&pod)
        .header("Content-Type", "application/apply-patch+yaml")
        .query(&[("fieldManager", "hostile-input-test"), ("force", "true")])
        .body(shallow)
        .send()
        .unwrap();
    let code = response.status().as_u16();
    let body: Value = serde_json::from_str(&response.text().unwrap()).unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["metadata"]["labels"]["depth"], "ok", "{body}");
    let created = client()
        .post(&configmaps)
        .header("Content-Type", "application/yaml")
        .body("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shallow\ndata:\n  a: \"1\"\n")
        .send()
        .unwrap();
    assert_eq!(created.status().as_u16(), 201, "{}", created.text().unwrap());
}
