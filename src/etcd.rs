//! etcd as the log shared by several replicas (`--etcd-servers`): connects
//! the fleet to it, and follows its watch into the aggregator. Built with
//! the `etcd` feature only (its client's build needs protoc); without it,
//! `--etcd-servers` is refused with one line saying how to build with it.

use std::sync::Arc;

use actix::Addr;
use kubefold_actors::aggregator::Aggregator;
use kubefold_actors::fleet::Fleet;

use crate::config::EtcdConfig;

/// What follows the shared log once the aggregator runs.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub struct Replica {
    #[cfg(feature = "etcd")]
    log: Arc<kubefold_etcd::EtcdLog>,
}

/// The store metadata naming the shared log a data dir is a copy of.
pub const SHARED_LOG_META: &str = "shared-log";

/// Connects to etcd (before the data dir is read: it is checked against it).
#[cfg(feature = "etcd")]
pub fn connect(config: &EtcdConfig) -> anyhow::Result<Replica> {
    let options = kubefold_etcd::EtcdOptions {
        servers: config.servers.clone(),
        prefix: config.prefix.clone(),
        ca_file: config.ca_file.clone(),
        cert_file: config.cert_file.clone(),
        key_file: config.key_file.clone(),
    };
    let log = kubefold_etcd::EtcdLog::connect(&options)?;
    Ok(Replica { log })
}

/// Without the `etcd` feature: the one line that says how to get it.
#[cfg(not(feature = "etcd"))]
pub fn connect(_config: &EtcdConfig) -> anyhow::Result<Replica> {
    supported().map(|()| Replica {})
}

/// Whether the data dir can be used as this log's copy: `Ok(None)` yes,
/// `Ok(Some(why))` it is a stale copy to rebuild from the log, `Err`
/// it must not be used with it (nothing is changed then).
pub fn check_copy(replica: &Replica, store: &kubefold_store::Store, head_rv: u64) -> anyhow::Result<Option<String>> {
    let identity = replica.identity();
    match store.meta(SHARED_LOG_META)? {
        Some(of) if of == identity.as_bytes() => {}
        Some(of) => return Ok(Some(format!("it is a copy of another log ({})", String::from_utf8_lossy(&of)))),
        None if head_rv > 0 => anyhow::bail!(
            "the data dir holds kubefold's own history (written without --etcd-servers): a replica on etcd needs an empty data dir (or one it used with this etcd before)"
        ),
        None => store.put_meta(SHARED_LOG_META, identity.as_bytes())?,
    }
    let floor = replica.compacted_rv()?;
    Ok((head_rv > 0 && head_rv < floor).then(|| format!("its head resourceVersion {head_rv} is older than the log's compaction floor {floor}")))
}

/// Whether this build can use etcd; refused with the one line that says
/// how to build it, before anything starts.
pub fn supported() -> anyhow::Result<()> {
    #[cfg(not(feature = "etcd"))]
    anyhow::bail!(
        "this kubefold was built without etcd support: build it with `cargo build --release --features etcd` (needs protoc, Debian's protobuf-compiler) to use --etcd-servers"
    );
    #[cfg(feature = "etcd")]
    Ok(())
}

impl Replica {
    /// Which log this is (the etcd cluster and prefix).
    pub fn identity(&self) -> String {
        #[cfg(feature = "etcd")]
        return self.log.identity();
        #[cfg(not(feature = "etcd"))]
        String::new()
    }

    /// The log's compaction floor.
    pub fn compacted_rv(&self) -> anyhow::Result<u64> {
        #[cfg(feature = "etcd")]
        return Ok(self.log.compacted_rv()?);
        #[cfg(not(feature = "etcd"))]
        Ok(0)
    }

    /// Makes `fleet` a replica over the log: its aggregator commits there
    /// and applies what it holds, consistent reads wait for its head.
    pub fn attach(&self, fleet: &Arc<Fleet>) {
        #[cfg(feature = "etcd")]
        {
            fleet.set_shared(self.log.clone());
            tracing::info!(log = %self.log.identity(), "Replica over etcd: batches are committed to etcd and applied from its watch.");
        }
        #[cfg(not(feature = "etcd"))]
        let _ = fleet;
    }

    /// Follows the shared log's watch into `aggregator` until it stops:
    /// each response's transactions are applied in order; on any error
    /// (etcd restarted or unreachable, a compacted revision, a failed local
    /// commit) the aggregator catches up with a range read, and the watch
    /// resumes after what it applied.
    pub fn follow(&self, aggregator: Addr<Aggregator>) {
        #[cfg(feature = "etcd")]
        {
            let log = self.log.clone();
            self.log.spawn(async move {
                use kubefold_actors::aggregator::{ApplyReplicated, CatchUp};
                use tracing::warn;
                let mut backoff = std::time::Duration::from_millis(200);
                let mut watch: Option<kubefold_etcd::LogWatch> = None;
                loop {
                    let Some(current) = watch.as_mut() else {
                        match aggregator.send(CatchUp).await {
                            Ok(Ok(revision)) => {
                                watch = Some(log.watch(revision));
                                backoff = std::time::Duration::from_millis(200);
                            }
                            Ok(Err(e)) => {
                                warn!(error = %e, "Catching up with etcd failed; trying again.");
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                            }
                            // The aggregator stopped: so does this.
                            Err(_) => return,
                        }
                        continue;
                    };
                    match current.next().await {
                        Ok(batches) if batches.is_empty() => {}
                        Ok(batches) => match aggregator.send(ApplyReplicated(batches)).await {
                            Ok(Ok(_)) => {}
                            Ok(Err(e)) => {
                                warn!(error = %e, "Applying etcd's transactions failed; catching up.");
                                watch = None;
                            }
                            Err(_) => return,
                        },
                        Err(e) => {
                            warn!(error = %e, "The etcd watch failed; catching up, then watching again.");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                            watch = None;
                        }
                    }
                }
            });
        }
        #[cfg(not(feature = "etcd"))]
        let _ = aggregator;
    }
}
