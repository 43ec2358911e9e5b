//! etcd for `--etcd`: single-member etcd processes on free loopback ports
//! in the run's scratch dir, read through etcd's JSON gateway (`/v3/...`,
//! int64 fields as strings), and the arithmetic of the etcd figures.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use hyper::Method;
use serde_json::Value;

use crate::http::{self, Client};
use crate::procs::Proc;
use crate::Ctx;

/// A free loopback port (bound and released).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One etcd member, stopped when dropped.
pub struct Etcd {
    proc: Proc,
    /// Its client address.
    pub addr: SocketAddr,
    dir: PathBuf,
}

/// What etcd's status says of its database.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct DbStatus {
    /// etcd's revision.
    pub revision: u64,
    /// Bytes of the database file (`etcd_mvcc_db_total_size_in_bytes`).
    pub db_size: u64,
    /// Bytes of it in use (`etcd_mvcc_db_total_size_in_use_in_bytes`).
    pub db_size_in_use: u64,
}

/// An int64 of the JSON gateway (a string), or a plain number.
pub fn gateway_u64(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str()?.parse().ok())
}

/// The status of `/v3/maintenance/status`.
pub fn parse_status(v: &Value) -> Result<DbStatus> {
    let revision = gateway_u64(&v["header"]["revision"]).ok_or_else(|| anyhow!("no revision in etcd's status: {v}"))?;
    let db_size = gateway_u64(&v["dbSize"]).ok_or_else(|| anyhow!("no dbSize in etcd's status: {v}"))?;
    // 3.4 has it; an older etcd without it counts the whole file.
    let db_size_in_use = gateway_u64(&v["dbSizeInUse"]).unwrap_or(db_size);
    Ok(DbStatus { revision, db_size, db_size_in_use })
}

/// Bytes of etcd's database per object (`None` without objects).
pub fn bytes_per_object(db_bytes: u64, objects: u64) -> Option<f64> {
    (objects > 0).then(|| db_bytes as f64 / objects as f64)
}

impl Etcd {
    /// Starts etcd named `name` in a fresh dir under the scratch dir and
    /// waits until it answers `/health`.
    pub async fn start(ctx: &Ctx, name: &str) -> Result<Etcd> {
        let dir = ctx.scratch.join(format!("etcd-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let (client, peer) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let args: Vec<String> = [
            "--name",
            name,
            "--data-dir",
            &dir.join("data").display().to_string(),
            "--listen-client-urls",
            &client_url,
            "--advertise-client-urls",
            &client_url,
            "--listen-peer-urls",
            &peer_url,
            "--initial-advertise-peer-urls",
            &peer_url,
            "--initial-cluster",
            &format!("{name}={peer_url}"),
            // etcd's suggested maximum database size (its default is 2 GB):
            // the raw copies of 1M pods sit beside kubefold's own.
            "--quota-backend-bytes",
            "8589934592",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut proc = Proc::spawn(&format!("etcd-{name}"), Path::new("etcd"), &args, &ctx.logs.join(format!("etcd-{name}.log")))?;
        let addr: SocketAddr = format!("127.0.0.1:{client}").parse()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, body)) = http::get_once(addr, "/health", Duration::from_secs(2)).await {
                if memchr::memmem::find(&body, b"true").is_some() {
                    break;
                }
            }
            if !proc.alive() {
                bail!("etcd {name} exited at start; see {}", proc.log.display());
            }
            if Instant::now() > deadline {
                bail!("etcd {name} not healthy within 30 s; see {}", proc.log.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Etcd { proc, addr, dir })
    }

    /// Its client URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// POSTs `body` to a gateway path; any answer but 200 fails.
    async fn post(&self, path: &str, body: String) -> Result<Value> {
        let mut client = Client::new(self.addr);
        let (status, reply) = tokio::time::timeout(Duration::from_secs(300), client.request(Method::POST, path, "application/json", Bytes::from(body)))
            .await
            .map_err(|_| anyhow!("etcd {path}: no answer within 300 s"))??;
        if status != 200 {
            bail!("etcd {path}: HTTP {status}: {}", String::from_utf8_lossy(&reply[..reply.len().min(300)]));
        }
        serde_json::from_slice(&reply).with_context(|| format!("etcd {path}: not JSON"))
    }

    /// The database's size and revision.
    pub async fn status(&self) -> Result<DbStatus> {
        parse_status(&self.post("/v3/maintenance/status", "{}".into()).await?)
    }

    /// Compacts at the current revision (physically) and defragments;
    /// returns the status after.
    pub async fn compact_and_defragment(&self) -> Result<DbStatus> {
        let now = self.status().await?;
        self.post("/v3/kv/compaction", format!(r#"{{"revision":"{}","physical":true}}"#, now.revision)).await?;
        self.post("/v3/maintenance/defragment", "{}".into()).await?;
        self.status().await
    }

    /// Stops it and removes its data.
    pub fn stop(mut self) {
        self.proc.stop(Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Delivery latencies in ms: for every marker (event key, send time in ns)
/// and every client's receipts (event key, receipt time in ns), the time
/// from the write to the client. `Err` names the first marker a client
/// never received (a lost event).
pub fn delivery_latencies(markers: &[(u64, u64)], clients: &[Vec<(u64, u64)>]) -> Result<Vec<f64>, (usize, u64)> {
    let mut out = Vec::with_capacity(markers.len() * clients.len());
    for (c, received) in clients.iter().enumerate() {
        let at: std::collections::HashMap<u64, u64> = received.iter().copied().collect();
        for (key, sent) in markers {
            let got = at.get(key).ok_or((c, *key))?;
            out.push(got.saturating_sub(*sent) as f64 / 1e6);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_status_gives_revision_and_sizes() {
        let v: Value = serde_json::from_str(r#"{"header":{"revision":"1234"},"dbSize":"2097152","dbSizeInUse":"1048576"}"#).unwrap();
        let s = parse_status(&v).unwrap();
        assert_eq!((s.revision, s.db_size, s.db_size_in_use), (1234, 2_097_152, 1_048_576));
        let old: Value = serde_json::from_str(r#"{"header":{"revision":5},"dbSize":4096}"#).unwrap();
        assert_eq!(parse_status(&old).unwrap().db_size_in_use, 4096, "without dbSizeInUse the whole file counts");
        assert!(parse_status(&serde_json::json!({"header":{}})).is_err());
    }

    #[test]
    fn bytes_per_object_divides_and_refuses_zero_objects() {
        assert_eq!(bytes_per_object(1_000_000, 2_000), Some(500.0));
        assert_eq!(bytes_per_object(1_000_000, 0), None);
    }

    #[test]
    fn every_marker_is_timed_at_every_client_and_a_lost_one_is_named() {
        let markers = [(1, 1_000_000), (2, 5_000_000)];
        let clients = vec![vec![(1, 3_000_000), (2, 6_000_000)], vec![(2, 9_000_000), (1, 2_000_000), (7, 0)]];
        assert_eq!(delivery_latencies(&markers, &clients).unwrap(), vec![2.0, 1.0, 1.0, 4.0]);
        let lost = vec![vec![(1, 3_000_000), (2, 6_000_000)], vec![(1, 2_000_000)]];
        assert_eq!(delivery_latencies(&markers, &lost), Err((1, 2)));
    }
}
