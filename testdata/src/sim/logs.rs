//! `GET /api/v1/namespaces/{ns}/pods/{name}/log`: deterministic fake
//! container logs with kubelet's options (`container`, `follow`,
//! `previous`, `tailLines`, `sinceSeconds`, `sinceTime`, `timestamps`,
//! `limitBytes`) and error messages (Kubernetes docs "kubectl logs" and
//! `PodLogOptions`).
//!
//! A running container writes line `i` at `startedAt + i` seconds (plus a
//! stable sub-second offset); its text depends only on the pod uid, the
//! container and `i`, so the same request gives the same lines. Without
//! `tailLines`/`since*` the last 1,000 lines are served. `follow` then
//! sends each new line when its second comes, until the client goes away,
//! the pod is deleted or the simulator stops.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::list::{parse_bool, query_value};
use super::status::{ApiError, Result};
use super::Shared;

/// The most lines served from history without `tailLines` or `since*`.
const HISTORY: u64 = 1000;

/// `PodLogOptions` from the query.
#[derive(Debug, Clone, Default)]
pub struct LogOptions {
    /// `container`.
    pub container: Option<String>,
    /// `follow`.
    pub follow: bool,
    /// `previous`: the last terminated instance.
    pub previous: bool,
    /// `tailLines`.
    pub tail_lines: Option<u64>,
    /// `sinceSeconds`.
    pub since_seconds: Option<i64>,
    /// `sinceTime`.
    pub since_time: Option<DateTime<Utc>>,
    /// `timestamps`.
    pub timestamps: bool,
    /// `limitBytes`.
    pub limit_bytes: Option<usize>,
}

impl LogOptions {
    /// Parses the query of a log request.
    pub fn parse(query: &[(String, String)]) -> Result<LogOptions> {
        let get = |name: &str| query_value(query, name).filter(|v| !v.is_empty());
        let number = |name: &str| -> Result<Option<i64>> {
            get(name)
                .map(|v| v.parse::<i64>().map_err(|_| ApiError::BadRequest(format!("{name}: strconv.ParseInt: parsing \"{v}\": invalid syntax"))))
                .transpose()
        };
        let since_time = get("sinceTime")
            .map(|t| {
                DateTime::parse_from_rfc3339(t)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|_| ApiError::BadRequest(format!("sinceTime: parsing time \"{t}\" as RFC3339 failed")))
            })
            .transpose()?;
        let options = LogOptions {
            container: get("container").map(str::to_string),
            follow: parse_bool("follow", get("follow").unwrap_or_default())?,
            previous: parse_bool("previous", get("previous").unwrap_or_default())?,
            tail_lines: number("tailLines")?.map(|n| n.max(0) as u64),
            since_seconds: number("sinceSeconds")?,
            since_time,
            timestamps: parse_bool("timestamps", get("timestamps").unwrap_or_default())?,
            limit_bytes: number("limitBytes")?.map(|n| n.max(0) as usize),
        };
        if options.since_seconds.is_some() && options.since_time.is_some() {
            return Err(ApiError::BadRequest("at most one of sinceTime or sinceSeconds may be specified".into()));
        }
        if options.since_seconds.is_some_and(|s| s < 1) {
            return Err(ApiError::BadRequest("sinceSeconds: Invalid value: must be greater than 0".into()));
        }
        Ok(options)
    }
}

/// The log of one container instance.
#[derive(Debug, Clone)]
pub struct Source {
    /// Seed of the line texts.
    seed: u64,
    /// The container's image (chooses the log format).
    image: String,
    /// When line 0 was written.
    started: DateTime<Utc>,
    /// When the instance ended (`previous`), if it did.
    finished: Option<DateTime<Utc>>,
    /// The pod's uid, to notice its deletion while following.
    pub pod_uid: String,
}

fn stable_hash(parts: &[&str]) -> u64 {
    parts
        .iter()
        .flat_map(|p| p.bytes().chain([0]))
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn parse_time(value: &Value) -> Option<DateTime<Utc>> {
    value.as_str().and_then(|t| DateTime::parse_from_rfc3339(t).ok()).map(|t| t.with_timezone(&Utc))
}

/// Chooses the container and instance a request reads, with kubelet's errors.
pub fn source(pod: &Value, options: &LogOptions) -> Result<Source> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let containers: Vec<&Value> = pod["spec"]["containers"].as_array().map(|c| c.iter().collect()).unwrap_or_default();
    let names: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
    let init_names: Vec<&str> = pod["spec"]["initContainers"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let ephemeral: Vec<&Value> = pod["spec"]["ephemeralContainers"].as_array().map(|c| c.iter().collect()).unwrap_or_default();
    let ephemeral_names: Vec<&str> = ephemeral.iter().filter_map(|c| c["name"].as_str()).collect();
    let container = match &options.container {
        Some(name) => {
            if !names.contains(&name.as_str()) && !init_names.contains(&name.as_str()) && !ephemeral_names.contains(&name.as_str()) {
                return Err(ApiError::BadRequest(format!("container {name} is not valid for pod {pod_name}")));
            }
            name.clone()
        }
        None if names.len() == 1 => names[0].to_string(),
        None => {
            let all: Vec<&str> = names.iter().chain(init_names.iter()).copied().collect();
            return Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                all.join(" ")
            )));
        }
    };
    let statuses = if ephemeral_names.contains(&container.as_str()) { "ephemeralContainerStatuses" } else { "containerStatuses" };
    let status = pod["status"][statuses]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == container.as_str()))
        .cloned()
        .unwrap_or(Value::Null);
    let image = status["image"]
        .as_str()
        .or_else(|| containers.iter().chain(ephemeral.iter()).find(|c| c["name"] == container.as_str()).and_then(|c| c["image"].as_str()))
        .unwrap_or_default()
        .to_string();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_string();
    if options.previous {
        let terminated = &status["lastState"]["terminated"];
        let (Some(started), Some(finished)) = (parse_time(&terminated["startedAt"]), parse_time(&terminated["finishedAt"])) else {
            return Err(ApiError::BadRequest(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        };
        let restarts = status["restartCount"].as_i64().unwrap_or(0).to_string();
        return Ok(Source {
            seed: stable_hash(&[&uid, &container, &restarts, "previous"]),
            image,
            started,
            finished: Some(finished),
            pod_uid: uid,
        });
    }
    let Some(started) = parse_time(&status["state"]["running"]["startedAt"]) else {
        let reason = status["state"]["waiting"]["reason"].as_str().unwrap_or("ContainerCreating");
        return Err(ApiError::BadRequest(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {reason}"
        )));
    };
    let restarts = status["restartCount"].as_i64().unwrap_or(0).to_string();
    Ok(Source { seed: stable_hash(&[&uid, &container, &restarts]), image, started, finished: None, pod_uid: uid })
}

fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed ^ i.wrapping_add(0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `RFC3339Nano` as Go formats it (trailing zeros of the fraction trimmed).
fn rfc3339_nano(t: DateTime<Utc>) -> String {
    let base = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = t.timestamp_subsec_nanos();
    if nanos == 0 {
        return format!("{base}Z");
    }
    let fraction = format!("{nanos:09}");
    format!("{base}.{}Z", fraction.trim_end_matches('0'))
}

impl Source {
    /// The time of line `i`.
    pub fn time(&self, i: u64) -> DateTime<Utc> {
        let nanos = (mix(self.seed, i) % 1_000_000_000) as i64;
        self.started + chrono::Duration::seconds(i as i64) + chrono::Duration::nanoseconds(nanos)
    }

    /// The text of line `i` (without newline).
    pub fn text(&self, i: u64) -> String {
        let r = mix(self.seed, i);
        let t = self.time(i);
        let client = format!("10.244.{}.{}", r % 3, 2 + (r >> 8) % 200);
        let paths = ["/", "/healthz", "/api/items", "/api/items/42", "/api/cart", "/static/app.js", "/metrics"];
        let path = paths[((r >> 16) % paths.len() as u64) as usize];
        let status = [200, 200, 200, 200, 201, 304, 404, 500][((r >> 24) % 8) as usize];
        if self.image.contains("nginx") {
            format!(
                "{client} - - [{}] \"GET {path} HTTP/1.1\" {status} {} \"-\" \"kube-probe/1.33\"",
                t.format("%d/%b/%Y:%H:%M:%S +0000"),
                (r >> 32) % 4096
            )
        } else if self.image.contains("redis") {
            format!("1:M {} * {} changes in 60 seconds. Saving...", t.format("%d %b %Y %H:%M:%S%.3f"), (r >> 32) % 100)
        } else if self.image.contains("coredns") {
            format!(
                "[INFO] {client}:{} - {} \"A IN checkout.shop.svc.cluster.local. udp 53 false 512\" NOERROR qr,aa,rd 106 0.000{}s",
                30000 + (r >> 16) % 30000,
                (r >> 40) % 65536,
                100 + (r >> 48) % 900
            )
        } else {
            let level = if status >= 500 { "error" } else { "info" };
            format!(
                "{{\"time\":\"{}\",\"level\":\"{level}\",\"msg\":\"request handled\",\"method\":\"GET\",\"path\":\"{path}\",\"status\":{status},\"duration_ms\":{}}}",
                rfc3339_nano(t),
                1 + (r >> 32) % 250
            )
        }
    }

    /// Line `i` as served: with its timestamp when asked, and a newline.
    pub fn format(&self, i: u64, timestamps: bool) -> String {
        if timestamps {
            format!("{} {}\n", rfc3339_nano(self.time(i)), self.text(i))
        } else {
            format!("{}\n", self.text(i))
        }
    }

    /// The index after the last line written by `now` (0 when none).
    pub fn end(&self, now: DateTime<Utc>) -> u64 {
        let until = self.finished.map_or(now, |f| f.min(now));
        let mut end = (until - self.started).num_seconds().max(-1) as u64 + 1;
        while end > 0 && self.time(end - 1) > until {
            end -= 1;
        }
        end
    }

    /// The indexes of the lines a request returns before following.
    pub fn selection(&self, options: &LogOptions, now: DateTime<Utc>) -> std::ops::Range<u64> {
        let end = self.end(now);
        let since = options
            .since_time
            .or_else(|| options.since_seconds.map(|s| now - chrono::Duration::seconds(s)));
        let mut start = match since {
            Some(since) => {
                let mut i = ((since - self.started).num_seconds().max(0) as u64).min(end);
                while i > 0 && self.time(i - 1) >= since {
                    i -= 1;
                }
                while i < end && self.time(i) < since {
                    i += 1;
                }
                i
            }
            None => end.saturating_sub(HISTORY),
        };
        if let Some(tail) = options.tail_lines {
            start = start.max(end.saturating_sub(tail));
        }
        start..end
    }
}

/// The log body: the selected lines, then (with `follow`) new lines as they come.
pub fn stream(
    shared: Arc<Shared>,
    resource: usize,
    key: String,
    source: Source,
    options: LogOptions,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    struct State {
        shared: Arc<Shared>,
        resource: usize,
        key: String,
        source: Source,
        options: LogOptions,
        next: u64,
        end: u64,
        sent: usize,
        done: bool,
    }
    let range = source.selection(&options, Utc::now());
    let state = State { shared, resource, key, source, options, next: range.start, end: range.end, sent: 0, done: false };
    futures::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        let limit = s.options.limit_bytes.unwrap_or(usize::MAX);
        let mut out = String::new();
        if s.next < s.end {
            while s.next < s.end && out.len() < super::list::CHUNK {
                out.push_str(&s.source.format(s.next, s.options.timestamps));
                s.next += 1;
            }
        } else if s.options.follow && s.source.finished.is_none() {
            let wait = (s.source.time(s.next) - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            tokio::select! {
                _ = s.shared.shutdown.cancelled() => return None,
                _ = tokio::time::sleep(wait) => {}
            }
            let alive = s
                .shared
                .store
                .read()
                .ok()
                .and_then(|store| store.get(s.resource, &s.key).map(|p| p.uid() == s.source.pod_uid))
                .unwrap_or(false);
            if !alive {
                return None;
            }
            out.push_str(&s.source.format(s.next, s.options.timestamps));
            s.next += 1;
            s.end = s.next;
        } else {
            return None;
        }
        if s.sent + out.len() >= limit {
            out.truncate(limit - s.sent);
            s.done = true;
        }
        s.sent += out.len();
        Some((Ok(Bytes::from(out)), s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web-0", "uid": "u1"},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}, {"name": "sidecar", "image": "envoy:1"}]},
            "status": {"containerStatuses": [
                {"name": "web", "image": "nginx:1.27", "restartCount": 0, "state": {"running": {"startedAt": "2025-06-01T12:00:00Z"}}},
                {"name": "sidecar", "image": "envoy:1", "restartCount": 1,
                 "lastState": {"terminated": {"startedAt": "2025-06-01T11:00:00Z", "finishedAt": "2025-06-01T11:00:30Z"}},
                 "state": {"running": {"startedAt": "2025-06-01T12:00:00Z"}}},
            ]},
        })
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn containers_must_be_named_when_there_are_several() {
        let error = source(&pod(), &LogOptions::default()).unwrap_err();
        assert_eq!(error.to_string(), "a container name must be specified for pod web-0, choose one of: [web sidecar]");
        let bogus = LogOptions { container: Some("db".into()), ..Default::default() };
        assert_eq!(source(&pod(), &bogus).unwrap_err().to_string(), "container db is not valid for pod web-0");
        let previous = LogOptions { container: Some("web".into()), previous: true, ..Default::default() };
        assert_eq!(
            source(&pod(), &previous).unwrap_err().to_string(),
            "previous terminated container \"web\" in pod \"web-0\" not found"
        );
    }

    #[test]
    fn lines_are_deterministic_and_selected_by_tail_and_since() {
        let options = LogOptions { container: Some("web".into()), ..Default::default() };
        let s = source(&pod(), &options).unwrap();
        let now = at("2025-06-01T12:00:59.999Z");
        assert_eq!(s.end(now), 60);
        assert_eq!(s.text(7), source(&pod(), &options).unwrap().text(7));
        assert!(s.text(0).contains("\"GET "));
        assert_eq!(s.selection(&LogOptions { tail_lines: Some(5), ..options.clone() }, now), 55..60);
        let since = s.selection(&LogOptions { since_seconds: Some(10), ..options.clone() }, now);
        assert!((49..=51).contains(&since.start), "{since:?}");
        let stamped = s.format(3, true);
        assert!(stamped.starts_with("2025-06-01T12:00:03"));
        assert!(stamped.ends_with('\n'));
    }

    #[test]
    fn previous_instances_end_when_they_terminated() {
        let options = LogOptions { container: Some("sidecar".into()), previous: true, ..Default::default() };
        let s = source(&pod(), &options).unwrap();
        assert!((30..=31).contains(&s.end(at("2025-06-01T13:00:00Z"))));
    }

    #[test]
    fn options_parse_like_pod_log_options() {
        let q = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let o = LogOptions::parse(&q(&[("follow", "true"), ("tailLines", "10"), ("timestamps", "1")])).unwrap();
        assert!(o.follow && o.timestamps);
        assert_eq!(o.tail_lines, Some(10));
        assert_eq!(LogOptions::parse(&q(&[("sinceSeconds", "0")])).unwrap_err().code(), 400);
    }
}
